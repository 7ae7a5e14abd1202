//! A backend that is the listener feeding its own pool: every request would come back to
//! trafik, which would forward it again, until sockets and memory run out. Caught here for
//! addresses written in the file; a loop closed another way (a name, another interface, a chain
//! of proxies) is caught at run time by trafik's own name in `Via` (508 Loop Detected).

use std::net::SocketAddr;

use super::report::Report;
use super::schema::File;
use super::values::BackendAddress;

/// Reports every backend address on which one of `file`'s listeners accepts the requests it
/// would send there: a listener whose routes lead into the pool that names it. (A pool may
/// well reach another of trafik's listeners on purpose, as a TLS hop does.)
pub fn check(report: &mut Report, file: &File) {
    for (p, pool) in file.pools.iter().enumerate() {
        let pool = pool.get_ref();
        let (Some(name), Some(backends)) = (&pool.name, &pool.backends) else {
            continue;
        };
        let feeding: Vec<(usize, SocketAddr)> = file
            .listeners
            .iter()
            .enumerate()
            .filter_map(|(i, listener)| {
                let listener = listener.get_ref();
                let listen = listener.listen.as_ref()?.get_ref().0;
                let routes = listener
                    .routes
                    .iter()
                    .filter_map(|r| r.get_ref().pool.as_ref());
                let mut pools = routes.chain(listener.pool.as_ref());
                pools
                    .any(|p| p.get_ref() == name.get_ref())
                    .then_some((i, listen))
            })
            .collect();
        for (b, backend) in backends.get_ref().iter().enumerate() {
            let Some(address) = &backend.get_ref().address else {
                continue;
            };
            let BackendAddress::Ip(target) = *address.get_ref() else {
                continue;
            };
            if let Some((i, _)) = feeding.iter().find(|(_, listen)| accepts(*listen, target)) {
                report.error(
                    address.span(),
                    &format!("pool[{p}].backends[{b}].address"),
                    format!(
                        "{target} is the address of listener[{i}], whose routes lead into this pool: every request would loop back into trafik; expected a backend's address"
                    ),
                );
            }
        }
    }
}

/// Whether a socket listening on `listen` accepts a connect to `target`: the same port, and
/// the same address or a wildcard listener reached through this machine's loopback.
fn accepts(listen: SocketAddr, target: SocketAddr) -> bool {
    let local = |address: SocketAddr| address.ip().is_loopback() || address.ip().is_unspecified();
    listen.port() == target.port()
        && (listen.ip() == target.ip() || (listen.ip().is_unspecified() && local(target)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listener_takes_connects_to_loopback_on_its_port() {
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        assert!(accepts(at("127.0.0.1:8080"), at("127.0.0.1:8080")));
        assert!(accepts(at("0.0.0.0:8080"), at("127.0.0.1:8080")));
        assert!(accepts(at("[::]:8080"), at("[::1]:8080")));
        assert!(!accepts(at("127.0.0.1:8080"), at("127.0.0.1:8081")));
        assert!(!accepts(at("127.0.0.1:8080"), at("127.0.0.2:8080")));
        assert!(!accepts(at("127.0.0.1:0"), at("127.0.0.1:8081")));
    }
}
