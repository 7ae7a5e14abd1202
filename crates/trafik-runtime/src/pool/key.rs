//! The hash key of a request, for hash-based selection and key stickiness.

use std::net::{IpAddr, SocketAddr};

use trafik_balance::hash::stable_hash;

use crate::plan::HashKey;
use crate::sticky::find_cookie;
use crate::view::RequestView;

/// The stable hash of the part of `request` that `key` names; `None` when the request lacks it
/// (the rule then spreads such requests evenly).
pub fn request_key(key: &HashKey, request: &impl RequestView, client: SocketAddr) -> Option<u64> {
    let bytes: &[u8] = match key {
        HashKey::Header(name) => request.header_values(name.as_str()).next()?,
        HashKey::Cookie(name) => find_cookie(request, name)?.as_bytes(),
        HashKey::Query(name) => request
            .query()?
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| k == name)?
            .1
            .as_bytes(),
        HashKey::Path => request.path().as_bytes(),
        HashKey::ClientIp => return Some(client_ip_key(client.ip())),
    };
    Some(stable_hash(bytes))
}

/// The `client-ip` key: the stable hash of the address's bytes. Layer-4 pools key on it too,
/// so a client lands where it would over HTTP.
pub fn client_ip_key(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(ip) => stable_hash(&ip.octets()),
        IpAddr::V6(ip) => stable_hash(&ip.octets()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, Request};

    fn request() -> Request<()> {
        Request::get("/takip/TR-1?musteri=42&x=1")
            .header("x-istemci", "buyuk-0")
            .header("cookie", "oturum=abc; tema=koyu")
            .body(())
            .unwrap()
    }

    #[test]
    fn each_source_hashes_its_own_bytes() {
        let client: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let r = request();
        let key = |k: HashKey| request_key(&k, &r, client);
        assert_eq!(
            key(HashKey::Header(HeaderName::from_static("x-istemci"))),
            Some(stable_hash(b"buyuk-0"))
        );
        assert_eq!(
            key(HashKey::Cookie("tema".into())),
            Some(stable_hash(b"koyu"))
        );
        assert_eq!(
            key(HashKey::Query("musteri".into())),
            Some(stable_hash(b"42"))
        );
        assert_eq!(key(HashKey::Path), Some(stable_hash(b"/takip/TR-1")));
        assert_eq!(key(HashKey::ClientIp), Some(stable_hash(&[10, 0, 0, 1])));
        assert_eq!(key(HashKey::Query("yok".into())), None);
        assert_eq!(key(HashKey::Header(HeaderName::from_static("x-yok"))), None);
    }
}
