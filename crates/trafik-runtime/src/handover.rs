//! Listening sockets handed from a running trafik to the binary that replaces it, as systemd's
//! socket activation passes them: the old process lets its successor inherit the descriptors
//! and names them in `TRAFIK_LISTEN_FDS` (`ADDRESS=FD,FD;…`). The successor takes them instead
//! of binding; both processes then hold the very same sockets, so connections waiting in a
//! backlog are accepted by one or the other and none is refused.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, OnceLock};

/// The environment variable that names the inherited sockets.
pub const LISTEN_FDS: &str = "TRAFIK_LISTEN_FDS";

fn inherited() -> &'static Mutex<HashMap<SocketAddr, Vec<TcpListener>>> {
    static INHERITED: OnceLock<Mutex<HashMap<SocketAddr, Vec<TcpListener>>>> = OnceLock::new();
    INHERITED.get_or_init(|| {
        let named = std::env::var(LISTEN_FDS).unwrap_or_default();
        Mutex::new(parse(&named).into_iter().filter_map(adopt).collect())
    })
}

/// `ADDRESS=FD,FD;…` as written by [`describe`]; anything malformed is skipped.
fn parse(named: &str) -> Vec<(SocketAddr, Vec<RawFd>)> {
    named
        .split(';')
        .filter_map(|entry| {
            let (address, fds) = entry.split_once('=')?;
            let fds = fds
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            Some((address.parse().ok()?, fds))
        })
        .collect()
}

/// Takes ownership of the descriptors named for `address` that are open sockets listening
/// there; each is marked close-on-exec again so it goes no further than this process.
fn adopt((address, fds): (SocketAddr, Vec<RawFd>)) -> Option<(SocketAddr, Vec<TcpListener>)> {
    let sockets: Vec<TcpListener> = fds
        .into_iter()
        .filter_map(|fd| {
            // SAFETY: F_GETFD only asks whether `fd` is open; nothing else in this process
            // uses a descriptor it did not open itself.
            if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
                return None;
            }
            // SAFETY: the descriptor is open and was handed to this process to own.
            let socket = TcpListener::from(unsafe { OwnedFd::from_raw_fd(fd) });
            // SAFETY: sets a flag on a descriptor this process owns.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            (socket.local_addr().ok()? == address).then_some(socket)
        })
        .collect();
    (!sockets.is_empty()).then_some((address, sockets))
}

/// The inherited sockets listening on `address`, if any (taken once).
pub fn take(address: SocketAddr) -> Option<Vec<TcpListener>> {
    if address.port() == 0 {
        return None;
    }
    let sockets = inherited()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&address)?;
    for socket in &sockets {
        socket.set_nonblocking(true).ok()?;
    }
    Some(sockets)
}

/// Closes inherited sockets no listener claimed (the new configuration dropped them), so
/// they do not hold connections nobody accepts.
pub fn close_unclaimed() {
    inherited()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
}

/// The value of [`LISTEN_FDS`] for `sockets`, and every descriptor it names (which the
/// successor must inherit).
pub fn describe(sockets: &[(SocketAddr, Vec<RawFd>)]) -> (String, Vec<RawFd>) {
    let named = sockets
        .iter()
        .map(|(address, fds)| {
            let fds: Vec<String> = fds.iter().map(ToString::to_string).collect();
            format!("{address}={}", fds.join(","))
        })
        .collect::<Vec<_>>()
        .join(";");
    let fds = sockets
        .iter()
        .flat_map(|(_, fds)| fds.iter().copied())
        .collect();
    (named, fds)
}

/// Copies of a listener's sockets, kept to hand over; dropped with the listener.
pub fn copies(sockets: &[TcpListener]) -> Vec<TcpListener> {
    sockets.iter().filter_map(|s| s.try_clone().ok()).collect()
}

/// The raw descriptors of `sockets`.
pub fn raw(sockets: &[TcpListener]) -> Vec<RawFd> {
    sockets.iter().map(AsRawFd::as_raw_fd).collect()
}

/// The environment variable naming the descriptor on which the successor says it is ready.
pub const READY_FD: &str = "TRAFIK_UPGRADE_READY_FD";

/// Starts the successor: `program` with `args`, inheriting `sockets` (named in
/// [`LISTEN_FDS`]) and one end of a socket pair on which it writes once it serves. Returns the
/// child and the other end, which reads empty if the child dies first.
pub fn spawn_successor(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    sockets: &[(SocketAddr, Vec<RawFd>)],
) -> std::io::Result<(std::process::Child, std::os::unix::net::UnixStream)> {
    use std::os::unix::process::CommandExt;
    let (named, mut inherit) = describe(sockets);
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    inherit.push(theirs.as_raw_fd());
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env(LISTEN_FDS, named)
        .env(READY_FD, theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null());
    // SAFETY: between fork and exec only fcntl runs, which is async-signal-safe; it clears
    // close-on-exec on the descriptors the successor is to inherit.
    unsafe {
        command.pre_exec(move || {
            for &fd in &inherit {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    drop(theirs);
    Ok((child, ours))
}

/// In a successor: tells the process that started it that it serves now.
pub fn tell_ready() {
    let Some(fd) = std::env::var(READY_FD)
        .ok()
        .and_then(|fd| fd.parse::<RawFd>().ok())
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        .filter(|&fd| fd > 2 && unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1)
    else {
        return;
    };
    // SAFETY: the descriptor is open and was handed to this process for this one message.
    let mut stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    let _ = std::io::Write::write_all(&mut stream, b"ready\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_round_trips_and_malformed_entries_are_skipped() {
        let sockets = vec![
            ("127.0.0.1:8080".parse().unwrap(), vec![5, 6]),
            ("[::1]:9090".parse().unwrap(), vec![7]),
        ];
        let (named, fds) = describe(&sockets);
        assert_eq!(named, "127.0.0.1:8080=5,6;[::1]:9090=7");
        assert_eq!(fds, vec![5, 6, 7]);
        assert_eq!(parse(&named), sockets);
        assert!(parse("nonsense;1.2.3.4:80=x;=3").is_empty());
    }

    #[test]
    fn only_an_open_socket_listening_on_the_address_is_adopted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let fd = listener.try_clone().unwrap();
        let fd = std::os::fd::IntoRawFd::into_raw_fd(fd);
        let elsewhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(adopt((elsewhere, vec![fd])).is_none(), "another address");
        // The mismatched adoption closed it; a fresh copy is adopted.
        let fd = std::os::fd::IntoRawFd::into_raw_fd(listener.try_clone().unwrap());
        let (_, adopted) = adopt((address, vec![fd])).unwrap();
        assert_eq!(adopted[0].local_addr().unwrap(), address);
    }
}
