//! With no file descriptor left, accepting fails at once, again and again: the admin API must
//! wait between attempts instead of spinning a core, and health probes that cannot open a
//! socket must not mark backends down. In a test binary of its own, since it lowers the whole
//! process's descriptor limit; its tests take turns.
#![allow(unsafe_code)] // getrlimit and setrlimit through libc

use std::time::Duration;

use trafik_test_support::proxy::*;

/// CPU time this process has used, in clock ticks (utime + stime from /proc/self/stat, read
/// through a file opened beforehand: with no descriptor left, it could not be opened).
fn cpu_ticks(stat: &mut std::fs::File) -> u64 {
    use std::io::{Read, Seek};
    let mut text = String::new();
    stat.seek(std::io::SeekFrom::Start(0)).unwrap();
    stat.read_to_string(&mut text).unwrap();
    let stat = text;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

fn set_descriptor_limit(limit: u64) {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(
        // SAFETY: getrlimit only writes the struct passed.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) },
        0
    );
    current.rlim_cur = limit;
    // SAFETY: setrlimit only reads the struct passed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &current) }, 0);
}

/// The descriptor limit is the process's: one test at a time changes it.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "current_thread")]
async fn the_admin_api_backs_off_when_out_of_descriptors() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan(&[replicas[0].address()])).unwrap();
    // Every thread of the instance is up and answering before descriptors run out.
    status(&running).await;
    let admin = running.admin_address().unwrap();
    // Sockets made while descriptors are plenty, connected once none are left: the kernel
    // completes the handshakes, and every accept then fails with EMFILE.
    let waiting: Vec<socket2::Socket> = (0..8)
        .map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap())
        .collect();
    let (soft, _) = {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct passed.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        (limit.rlim_cur, limit.rlim_max)
    };
    let mut stat = std::fs::File::open("/proc/self/stat").unwrap();
    // Every descriptor in use, less the one that counted them: none is left.
    set_descriptor_limit(open_descriptors().saturating_sub(1));
    for socket in &waiting {
        socket.connect(&admin.into()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_ticks(&mut stat);
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(&mut stat) - before;
    set_descriptor_limit(soft);
    drop(waiting);
    assert!(
        used < 30,
        "{used} ticks of CPU in one second while out of descriptors: the accept loop spins"
    );
    stop(running).await;
}

#[tokio::test(flavor = "current_thread")]
async fn probes_that_find_no_descriptor_leave_backends_up() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let replicas = replicas(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    // A probe that a busy machine makes slow must not fail for it: only one that finds no
    // descriptor is under test here.
    plan.pools[0].health = Some(trafik_proxy::HealthPlan {
        timeout: Duration::from_secs(5),
        ..course_health_check()
    });
    let running = trafik_proxy::start(plan).unwrap();
    let healthy = |status: &serde_json::Value| {
        status["pools"][0]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["healthy"] == true)
            .collect::<Vec<_>>()
    };
    wait_for_status(&running, |s| healthy(s) == [true, true]).await;
    // A connection opened beforehand asks while no descriptor is left.
    let admin = running.admin_address().unwrap();
    let mut client = Client::connect(admin).await;
    let ask = || {
        http::Request::get("/status")
            .header("host", admin.to_string())
            .body(http_body_util::Full::default())
            .unwrap()
    };
    assert_eq!(client.send(ask()).await.status, 200);
    let (soft, _) = {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct passed.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        (limit.rlim_cur, limit.rlim_max)
    };
    set_descriptor_limit(open_descriptors().saturating_sub(1));
    // Descriptors closed earlier left gaps below the limit: fill them too.
    let filler: Vec<std::fs::File> = std::iter::from_fn(|| std::fs::File::open("/dev/null").ok())
        .take(10_000)
        .collect();
    // Five probe intervals of 200 ms; with fall = 1 one failed probe would mark a backend down.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = client.send(ask()).await.json();
    drop(filler);
    set_descriptor_limit(soft);
    assert_eq!(healthy(&during), [true, true], "{during}");
    stop(running).await;
}
