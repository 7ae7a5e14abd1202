//! With no file descriptor left, accepting fails at once, again and again: the admin API must
//! wait between attempts instead of spinning a core. In a test binary of its own, since it
//! lowers the whole process's descriptor limit.

mod support;

use std::time::Duration;

use support::*;

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
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) },
        0
    );
    current.rlim_cur = limit;
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &current) }, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn the_admin_api_backs_off_when_out_of_descriptors() {
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
