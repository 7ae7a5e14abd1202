//! A minimal W3C WebDriver client for the dashboard's browser test: Debian's `chromedriver`
//! started on a free port (killed by its pid when dropped), driving headless `chromium`. The
//! few commands the test needs are JSON over HTTP/1.1 on a plain socket, one connection each
//! (read by its Content-Length);
//! a WebDriver crate (fantoccini) would bring a hyper client stack, cookie and url handling and
//! Mozilla's webdriver types into the build for these eight commands.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A running chromedriver.
pub struct Driver {
    child: Child,
    address: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Starts `chromedriver` on a free port and waits until it is ready.
    pub fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = crate::process::tool("chromedriver", "chromium-driver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; .ci/run installs it)");
        let driver = Driver {
            child,
            address: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((_, status)) = driver.call("GET", "/status", None)
                && status["value"]["ready"] == true
            {
                return driver;
            }
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One WebDriver command: its HTTP status and JSON answer.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> std::io::Result<(u16, Value)> {
        let mut stream = TcpStream::connect(&self.address)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.address,
            body.len()
        )?;
        // chromedriver says `Connection: close` but may keep the socket open: read by length.
        let mut answer = Vec::new();
        let mut buffer = [0; 16 * 1024];
        let head_end = loop {
            if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let read = stream.read(&mut buffer)?;
            if read == 0 {
                return Err(std::io::Error::other("closed before the head ended"));
            }
            answer.extend_from_slice(&buffer[..read]);
        };
        let head = String::from_utf8_lossy(&answer[..head_end]).to_ascii_lowercase();
        assert!(!head.contains("chunked"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        while answer.len() < head_end + length {
            let read = stream.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            answer.extend_from_slice(&buffer[..read]);
        }
        let body = String::from_utf8_lossy(&answer[head_end..]);
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Ok((status, serde_json::from_str(&body).unwrap_or(Value::Null)))
    }

    /// A new headless chromium session with its console log kept.
    pub fn session(&self, width: u32, height: u32) -> Session<'_> {
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         format!("--window-size={width},{height}")],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let (status, answer) = self.call("POST", "/session", Some(&capabilities)).unwrap();
        assert_eq!(status, 200, "new session: {answer}");
        Session {
            driver: self,
            id: answer["value"]["sessionId"].as_str().unwrap().to_owned(),
        }
    }
}

/// One browser session; closed when dropped.
pub struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = self
            .driver
            .call("DELETE", &format!("/session/{}", self.id), None);
    }
}

impl Session<'_> {
    /// A command of this session; panics on a WebDriver error.
    pub fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self
            .driver
            .call(
                method,
                &format!("/session/{}{path}", self.id),
                body.as_ref(),
            )
            .unwrap();
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer["value"].clone()
    }

    pub fn go(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub fn run(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Clicks the first element that matches `css`. A page that redraws itself (the dashboard
    /// polls) may replace the element between finding and clicking it: it is found again.
    pub fn click(&self, css: &str) {
        for _ in 0..20 {
            let found = self.command(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            );
            let id = found.as_object().and_then(|o| o.values().next()).unwrap();
            let id = id.as_str().unwrap().to_owned();
            let path = format!("/session/{}/element/{id}/click", self.id);
            let (status, answer) = self.driver.call("POST", &path, Some(&json!({}))).unwrap();
            if status == 200 {
                return;
            }
            assert_eq!(
                answer["value"]["error"], "stale element reference",
                "POST {path}: {answer}"
            );
        }
        panic!("{css} was replaced every time it was found");
    }

    /// The text of the open `alert`/`confirm`, then accepts it.
    pub fn accept_dialog(&self) -> String {
        let text = self.command("GET", "/alert/text", None);
        self.command("POST", "/alert/accept", Some(json!({})));
        text.as_str().unwrap_or_default().to_owned()
    }

    /// The browser console's entries since the last call (chromedriver's log endpoint).
    pub fn console(&self) -> Vec<Value> {
        let log = self.command("POST", "/se/log", Some(json!({"type": "browser"})));
        log.as_array().cloned().unwrap_or_default()
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let encoded = self.command("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap()
    }

    /// Polls `script` until it returns true; how long that took, or `None` after `most`.
    pub fn wait_until(&self, script: &str, most: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < most {
            if self.run(script) == Value::Bool(true) {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        None
    }
}
