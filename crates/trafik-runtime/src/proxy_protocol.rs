//! The PROXY protocol (HAProxy's `proxy-protocol.txt`, versions 1 and 2), as a sender: the
//! first bytes on a relayed connection tell the backend the client's address, which it would
//! otherwise see as trafik's. trafik only writes the header, never parses one, so it is written
//! here by hand (a few lines per version); the tests read it back with the `ppp` crate.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// Which version of the header to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// A text line: `PROXY TCP4 <client> <server> <client port> <server port>\r\n`.
    V1,
    /// A binary header of 28 (IPv4) or 52 (IPv6) bytes.
    V2,
}

/// The twelve bytes every version 2 header starts with.
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Version 2, command PROXY (the connection was relayed for the client named).
const V2_PROXY_COMMAND: u8 = 0x21;
/// Address family and transport: TCP over IPv4, TCP over IPv6.
const V2_TCP4: u8 = 0x11;
const V2_TCP6: u8 = 0x21;

impl ProxyProtocol {
    /// The name written in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            ProxyProtocol::V1 => "v1",
            ProxyProtocol::V2 => "v2",
        }
    }

    /// The header for a connection from `client` that arrived at `server` (trafik's listening
    /// address). Both addresses are written in one family; when they differ, IPv4 is written
    /// as IPv4-mapped IPv6.
    pub fn header(self, client: SocketAddr, server: SocketAddr) -> Vec<u8> {
        let (client, server) = same_family(client, server);
        match self {
            ProxyProtocol::V1 => {
                let family = if client.is_ipv4() { "TCP4" } else { "TCP6" };
                format!(
                    "PROXY {family} {} {} {} {}\r\n",
                    client.ip(),
                    server.ip(),
                    client.port(),
                    server.port()
                )
                .into_bytes()
            }
            ProxyProtocol::V2 => {
                let mut header = Vec::with_capacity(52);
                header.extend_from_slice(&V2_SIGNATURE);
                header.push(V2_PROXY_COMMAND);
                match (client, server) {
                    (SocketAddr::V4(client), SocketAddr::V4(server)) => {
                        header.push(V2_TCP4);
                        header.extend_from_slice(&12u16.to_be_bytes());
                        header.extend_from_slice(&client.ip().octets());
                        header.extend_from_slice(&server.ip().octets());
                    }
                    (client, server) => {
                        header.push(V2_TCP6);
                        header.extend_from_slice(&36u16.to_be_bytes());
                        header.extend_from_slice(&v6_octets(client));
                        header.extend_from_slice(&v6_octets(server));
                    }
                }
                header.extend_from_slice(&client.port().to_be_bytes());
                header.extend_from_slice(&server.port().to_be_bytes());
                header
            }
        }
    }
}

/// Both addresses as IPv4 if both are, else both as IPv6.
fn same_family(client: SocketAddr, server: SocketAddr) -> (SocketAddr, SocketAddr) {
    if client.is_ipv4() == server.is_ipv4() {
        return (client, server);
    }
    let v6 = |address: SocketAddr| SocketAddr::new(v6_octets(address).into(), address.port());
    (v6(client), v6(server))
}

fn v6_octets(address: SocketAddr) -> [u8; 16] {
    match address {
        SocketAddr::V4(v4) => v4.ip().to_ipv6_mapped().octets(),
        SocketAddr::V6(v6) => v6.ip().octets(),
    }
}

impl FromStr for ProxyProtocol {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "v1" => Ok(ProxyProtocol::V1),
            "v2" => Ok(ProxyProtocol::V2),
            _ => Err(format!(
                "expected \"v1\" (text) or \"v2\" (binary), found {text:?}"
            )),
        }
    }
}

impl fmt::Display for ProxyProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(client: &str, server: &str) -> (SocketAddr, SocketAddr) {
        (client.parse().unwrap(), server.parse().unwrap())
    }

    #[test]
    fn version_one_is_the_line_the_specification_shows() {
        let (client, server) = addresses("192.168.0.1:56324", "192.168.0.11:443");
        assert_eq!(
            ProxyProtocol::V1.header(client, server),
            b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
        );
        let (client, server) = addresses("[2001:db8::1]:56324", "[::1]:443");
        let line = ProxyProtocol::V1.header(client, server);
        assert_eq!(line, b"PROXY TCP6 2001:db8::1 ::1 56324 443\r\n");
        let parsed = ppp::v1::Header::try_from(line.as_slice()).unwrap();
        assert_eq!(
            parsed.addresses,
            ppp::v1::Addresses::new_tcp6(
                "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap(),
                "::1".parse().unwrap(),
                56324,
                443
            )
        );
    }

    #[test]
    fn version_two_reads_back_with_an_independent_parser() {
        for (client, server) in [
            addresses("192.168.0.1:56324", "192.168.0.11:443"),
            addresses("[2001:db8::1]:56324", "[2001:db8::2]:8443"),
        ] {
            let bytes = ProxyProtocol::V2.header(client, server);
            assert_eq!(bytes.len(), if client.is_ipv4() { 28 } else { 52 });
            let header = ppp::v2::Header::try_from(bytes.as_slice()).unwrap();
            assert_eq!(header.command, ppp::v2::Command::Proxy);
            assert_eq!(header.protocol, ppp::v2::Protocol::Stream);
            assert_eq!(header.addresses, (client, server).into());
            assert_eq!(header.len(), bytes.len(), "nothing after the addresses");
        }
    }

    #[test]
    fn mixed_families_are_written_as_ipv6() {
        let (client, server) = addresses("192.168.0.1:56324", "[::1]:443");
        let line = ProxyProtocol::V1.header(client, server);
        assert_eq!(line, b"PROXY TCP6 ::ffff:192.168.0.1 ::1 56324 443\r\n");
        let bytes = ProxyProtocol::V2.header(client, server);
        let header = ppp::v2::Header::try_from(bytes.as_slice()).unwrap();
        assert_eq!(header.address_family(), ppp::v2::AddressFamily::IPv6);
    }

    #[test]
    fn only_the_two_versions_are_names() {
        assert_eq!("v1".parse(), Ok(ProxyProtocol::V1));
        assert_eq!("v2".parse(), Ok(ProxyProtocol::V2));
        assert!("V2".parse::<ProxyProtocol>().is_err());
        assert!("2".parse::<ProxyProtocol>().is_err());
    }
}
