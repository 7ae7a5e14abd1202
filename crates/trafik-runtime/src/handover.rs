//! Listening sockets handed from a running trafik to the binary that replaces it, as systemd's
//! socket activation passes them: the old process lets its successor inherit the descriptors
//! and names them in `TRAFIK_LISTEN_FDS` (`ADDRESS=FD,FD;udp/ADDRESS=FD;…`). The successor takes
//! them instead of binding; both processes then hold the very same sockets, so connections
//! waiting in a backlog are accepted by one or the other and none is refused.
//!
//! An h3 listener's UDP sockets are handed over the same way rather than bound anew with
//! `SO_REUSEPORT`: a new socket would join the port's group and the kernel would hash some
//! clients to it and others away from it, for whole connections (those of the old process lost
//! until it closes). On the same sockets a datagram is read by whichever process reads first; the
//! other one drops what is not its connection's, and QUIC's loss recovery sends it again.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, OnceLock};

/// The environment variable that names the inherited sockets.
pub const LISTEN_FDS: &str = "TRAFIK_LISTEN_FDS";

/// What a handed socket carries: TCP (listening) or UDP (QUIC), which may share an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    /// The name's prefix in [`LISTEN_FDS`]: none for TCP, as predecessors wrote it.
    fn prefix(self) -> &'static str {
        match self {
            Transport::Tcp => "",
            Transport::Udp => "udp/",
        }
    }

    fn socket_type(self) -> socket2::Type {
        match self {
            Transport::Tcp => socket2::Type::STREAM,
            Transport::Udp => socket2::Type::DGRAM,
        }
    }
}

/// Sockets to hand over: what they carry, their address, their descriptors.
pub type Handed = (Transport, SocketAddr, Vec<RawFd>);

type Inherited = HashMap<(Transport, SocketAddr), Vec<OwnedFd>>;

fn inherited() -> &'static Mutex<Inherited> {
    static INHERITED: OnceLock<Mutex<Inherited>> = OnceLock::new();
    INHERITED.get_or_init(|| {
        let named = std::env::var(LISTEN_FDS).unwrap_or_default();
        Mutex::new(parse(&named).into_iter().filter_map(adopt).collect())
    })
}

/// `ADDRESS=FD,FD;udp/ADDRESS=FD;…` as written by [`describe`]; anything malformed is skipped.
fn parse(named: &str) -> Vec<Handed> {
    named
        .split(';')
        .filter_map(|entry| {
            let (address, fds) = entry.split_once('=')?;
            let (transport, address) = match address.strip_prefix(Transport::Udp.prefix()) {
                Some(address) => (Transport::Udp, address),
                None => (Transport::Tcp, address),
            };
            let fds = fds
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            Some((transport, address.parse().ok()?, fds))
        })
        .collect()
}

/// Takes ownership of the descriptors named for `address` that are open sockets of the named
/// transport bound there; each is marked close-on-exec again so it goes no further than this
/// process.
fn adopt((transport, address, fds): Handed) -> Option<((Transport, SocketAddr), Vec<OwnedFd>)> {
    let sockets: Vec<OwnedFd> = fds
        .into_iter()
        .filter_map(|fd| {
            // SAFETY: F_GETFD only asks whether `fd` is open; nothing else in this process
            // uses a descriptor it did not open itself.
            if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
                return None;
            }
            // SAFETY: the descriptor is open and was handed to this process to own.
            let socket = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: sets a flag on a descriptor this process owns.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            let checked = socket2::SockRef::from(&socket);
            let bound = checked.local_addr().ok()?.as_socket()? == address;
            (bound && checked.r#type().ok()? == transport.socket_type()).then_some(socket)
        })
        .collect();
    (!sockets.is_empty()).then_some(((transport, address), sockets))
}

/// The inherited descriptors of `transport` bound to `address`, if any (taken once), set
/// non-blocking.
fn take_fds(transport: Transport, address: SocketAddr) -> Option<Vec<OwnedFd>> {
    if address.port() == 0 {
        return None;
    }
    let sockets = inherited()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(transport, address))?;
    for socket in &sockets {
        socket2::SockRef::from(socket).set_nonblocking(true).ok()?;
    }
    Some(sockets)
}

/// The inherited TCP sockets listening on `address`, if any (taken once).
pub fn take(address: SocketAddr) -> Option<Vec<TcpListener>> {
    take_fds(Transport::Tcp, address).map(|fds| fds.into_iter().map(TcpListener::from).collect())
}

/// The inherited UDP sockets bound to `address` (an h3 listener's), if any (taken once).
pub fn take_udp(address: SocketAddr) -> Option<Vec<UdpSocket>> {
    take_fds(Transport::Udp, address).map(|fds| fds.into_iter().map(UdpSocket::from).collect())
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
pub fn describe(sockets: &[Handed]) -> (String, Vec<RawFd>) {
    let named = sockets
        .iter()
        .map(|(transport, address, fds)| {
            let fds: Vec<String> = fds.iter().map(ToString::to_string).collect();
            format!("{}{address}={}", transport.prefix(), fds.join(","))
        })
        .collect::<Vec<_>>()
        .join(";");
    let fds = sockets
        .iter()
        .flat_map(|(_, _, fds)| fds.iter().copied())
        .collect();
    (named, fds)
}

/// Copies of a listener's sockets (TCP or UDP), kept to hand over; dropped with the listener.
pub fn copies(sockets: &[impl AsFd]) -> Vec<OwnedFd> {
    sockets
        .iter()
        .filter_map(|s| s.as_fd().try_clone_to_owned().ok())
        .collect()
}

/// The raw descriptors of `sockets`.
pub fn raw(sockets: &[impl AsRawFd]) -> Vec<RawFd> {
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
    sockets: &[Handed],
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
            (
                Transport::Tcp,
                "127.0.0.1:8080".parse().unwrap(),
                vec![5, 6],
            ),
            (Transport::Udp, "127.0.0.1:8080".parse().unwrap(), vec![8]),
            (Transport::Tcp, "[::1]:9090".parse().unwrap(), vec![7]),
        ];
        let (named, fds) = describe(&sockets);
        assert_eq!(
            named,
            "127.0.0.1:8080=5,6;udp/127.0.0.1:8080=8;[::1]:9090=7"
        );
        assert_eq!(fds, vec![5, 6, 8, 7]);
        assert_eq!(parse(&named), sockets);
        assert!(parse("nonsense;1.2.3.4:80=x;=3;udp/=4").is_empty());
    }

    #[test]
    fn only_an_open_socket_of_its_transport_bound_to_the_address_is_adopted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let fd = |socket: &dyn AsFd| {
            std::os::fd::IntoRawFd::into_raw_fd(socket.as_fd().try_clone_to_owned().unwrap())
        };
        let elsewhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(adopt((Transport::Tcp, elsewhere, vec![fd(&listener)])).is_none());
        assert!(
            adopt((Transport::Udp, address, vec![fd(&listener)])).is_none(),
            "a TCP socket named as UDP"
        );
        // The mismatched adoptions closed theirs; a fresh copy is adopted.
        let (_, adopted) = adopt((Transport::Tcp, address, vec![fd(&listener)])).unwrap();
        assert_eq!(
            TcpListener::from(adopted.into_iter().next().unwrap())
                .local_addr()
                .unwrap(),
            address
        );

        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = udp.local_addr().unwrap();
        assert!(adopt((Transport::Tcp, address, vec![fd(&udp)])).is_none());
        let ((transport, _), adopted) = adopt((Transport::Udp, address, vec![fd(&udp)])).unwrap();
        assert_eq!(transport, Transport::Udp);
        assert_eq!(
            UdpSocket::from(adopted.into_iter().next().unwrap())
                .local_addr()
                .unwrap(),
            address
        );
    }
}
