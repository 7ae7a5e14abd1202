//! The dashboard in a real browser: headless chromium over WebDriver against `trafik serve` in
//! front of three `trafik upstream` processes, under load. The page loads without console
//! errors, shows the three backends up, shows one down soon after its process stops, and its
//! Drain button (confirmed) changes `/status`. Screenshots go to `$TRAFIK_SCREENSHOTS` when set.

mod common;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Trafik, get_json};
use serde_json::Value;

/// `N` distinct free ports: all bound at once, so none is handed out twice.
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<_> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

fn config(web: u16, admin: u16, backends: &[u16]) -> String {
    let mut text = format!(
        "[server]\nname = \"pano\"\nworkers = 2\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
         [[listener.route]]\npath_prefix = \"/takip\"\npool = \"takip\"\n\n\
         [[pool]]\nname = \"takip\"\n\n[pool.health]\npath = \"/saglik\"\ninterval = \"100ms\"\ntimeout = \"100ms\"\nfall = 1\nrise = 1\n"
    );
    for (i, port) in backends.iter().enumerate() {
        text.push_str(&format!(
            "\n[[pool.backends]]\naddress = \"127.0.0.1:{port}\"\nname = \"k{}\"\n",
            i + 1
        ));
    }
    text
}

/// Sends GETs on new connections until `stop`, at most 30 s and 50,000 requests.
fn load(web: u16, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let started = Instant::now();
        while !stop.load(Ordering::Relaxed)
            && started.elapsed() < Duration::from_secs(30)
            && sent.load(Ordering::Relaxed) < 50_000
        {
            if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", web)) {
                let n = sent.fetch_add(1, Ordering::Relaxed);
                let _ = write!(
                    stream,
                    "GET /takip/TR-{n} HTTP/1.1\r\nHost: kargo\r\nConnection: close\r\n\r\n"
                );
                let _ = stream.read_to_end(&mut Vec::new());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

fn save(name: &str, png: &[u8]) {
    if let Some(directory) = std::env::var_os("TRAFIK_SCREENSHOTS") {
        let path = std::path::Path::new(&directory).join(name);
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
    }
}

/// Console entries at level SEVERE (errors), which must be none.
fn errors(console: &[Value]) -> Vec<&Value> {
    console.iter().filter(|e| e["level"] == "SEVERE").collect()
}

#[test]
fn the_dashboard_shows_health_live_and_drains_on_a_confirmed_click() {
    let [web, admin, ports @ ..] = free_ports::<5>();
    let mut replicas: Vec<Option<Trafik>> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let address = format!("127.0.0.1:{port}");
            let name = format!("k{}", i + 1);
            Some(
                Trafik::start(
                    &["upstream", "--name", &name, "--listen", &address],
                    Stdio::null(),
                    "upstream",
                )
                .0,
            )
        })
        .collect();
    let directory = std::env::temp_dir().join(format!("trafik-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let file = directory.join("trafik.toml");
    std::fs::write(&file, config(web, admin, &ports)).unwrap();
    let (server, _) = Trafik::start(
        &["serve", "--config", file.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    );
    let admin_address = format!("127.0.0.1:{admin}");
    let (stop, sent) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let loader = load(web, stop.clone(), sent.clone());

    let driver = webdriver::Driver::start();
    let browser = driver.session(1280, 1000);
    browser.go(&format!("http://{admin_address}/?interval=200"));
    let all_up = "return document.querySelectorAll('tr.backend[data-state=up]').length === 3 \
                  && [...document.querySelectorAll('tr.backend .state')].every(s => s.textContent === 'UP');";
    assert!(
        browser
            .wait_until(all_up, Duration::from_secs(10))
            .is_some(),
        "three backends UP: {}",
        browser.run("return document.body.innerText;")
    );
    let console = browser.console();
    assert!(errors(&console).is_empty(), "console errors: {console:?}");
    // Some seconds of load, so the figures and charts have something to show.
    let figures = "return [...document.querySelectorAll('.figure b')][0].textContent !== '–' \
                   && Number([...document.querySelectorAll('.figure b')][0].textContent) > 0;";
    assert!(
        browser
            .wait_until(figures, Duration::from_secs(10))
            .is_some()
    );
    std::thread::sleep(Duration::from_secs(3));
    save("dashboard-under-load.png", &browser.screenshot());

    // One replica stops: the page says DOWN for it, as a word.
    let stopped = format!("127.0.0.1:{}", ports[1]);
    replicas[1].take().unwrap().stop();
    let down = format!(
        "const row = document.querySelector('tr.backend[data-backend=\"{stopped}\"]'); \
         return row !== null && row.dataset.state === 'down' && row.querySelector('.state').textContent === 'DOWN';"
    );
    let took = browser
        .wait_until(&down, Duration::from_secs(10))
        .expect("the stopped backend shown DOWN");
    eprintln!(
        "shown DOWN {} ms after its replica stopped",
        took.as_millis()
    );
    assert!(took <= Duration::from_secs(2), "DOWN after {took:?}");
    save("dashboard-backend-down.png", &browser.screenshot());

    // Drain k1 with its button and the confirmation: /status says draining.
    let drained = format!("127.0.0.1:{}", ports[0]);
    browser.click(&format!(
        "tr.backend[data-backend=\"{drained}\"] button[data-action=drain]"
    ));
    let asked = browser.accept_dialog();
    assert!(asked.contains("Drain k1"), "{asked}");
    let draining = |status: &Value| {
        status["pools"][0]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["address"] == drained.as_str() && b["draining"] == true)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !draining(&get_json(&admin_address, "/status")) {
        assert!(Instant::now() < deadline, "the drain click changed nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    let shown = format!(
        "return document.querySelector('tr.backend[data-backend=\"{drained}\"]').dataset.state === 'draining';"
    );
    assert!(
        browser
            .wait_until(&shown, Duration::from_secs(10))
            .is_some()
    );

    // A phone-size window: the same page, readable.
    browser.command(
        "POST",
        "/window/rect",
        Some(serde_json::json!({"width": 390, "height": 844})),
    );
    std::thread::sleep(Duration::from_millis(600));
    save("dashboard-phone.png", &browser.screenshot());
    let console = browser.console();
    assert!(errors(&console).is_empty(), "console errors: {console:?}");

    stop.store(true, Ordering::Relaxed);
    loader.join().unwrap();
    assert!(sent.load(Ordering::Relaxed) > 0);
    drop(browser);
    drop(driver);
    server.stop();
    let _ = std::fs::remove_dir_all(&directory);
}
