//! The parser against real ClientHellos (written by rustls, as a browser's would be), against
//! every truncation and re-fragmentation of them, and against garbage.

use std::sync::Arc;

use rustls::pki_types::ServerName;

use super::*;

/// The first bytes a rustls client sends: its ClientHello, in one record.
fn client_hello(name: &str, send_name: bool) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    config.enable_sni = send_name;
    let server = ServerName::try_from(name.to_owned()).unwrap();
    let mut client = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    let mut bytes = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut bytes).unwrap();
    }
    bytes
}

/// The same handshake bytes framed again into records of at most `size` bytes.
fn refragment(hello: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = hello;
    while !rest.is_empty() {
        let length = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        let (record, after) = rest.split_at(RECORD_HEADER + length);
        for chunk in record[RECORD_HEADER..].chunks(size) {
            out.extend_from_slice(&record[..3]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        rest = after;
    }
    out
}

/// A record holding a ClientHello whose body is `body`.
fn record(body: &[u8]) -> Vec<u8> {
    let mut message = vec![CLIENT_HELLO];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend_from_slice(body);
    let mut out = vec![HANDSHAKE_RECORD, 3, 1];
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(&message);
    out
}

/// A minimal TLS 1.2 hello body: version, random, empty session, one suite, no compression,
/// then `extensions` (none at all when `None`).
fn body(extensions: Option<&[u8]>) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x00, 0x2f, 1, 0]);
    if let Some(extensions) = extensions {
        body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
        body.extend_from_slice(extensions);
    }
    body
}

fn server_name_extension(name: &[u8]) -> Vec<u8> {
    let mut entry = vec![HOST_NAME];
    entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
    entry.extend_from_slice(name);
    let mut list = (entry.len() as u16).to_be_bytes().to_vec();
    list.extend_from_slice(&entry);
    let mut extension = SERVER_NAME_EXTENSION.to_be_bytes().to_vec();
    extension.extend_from_slice(&(list.len() as u16).to_be_bytes());
    extension.extend_from_slice(&list);
    extension
}

#[test]
fn a_real_client_hello_names_its_server_in_lower_case() {
    let hello = client_hello("a.kargo.test", true);
    assert_eq!(
        hello[0], HANDSHAKE_RECORD,
        "rustls wrote a handshake record"
    );
    assert_eq!(
        parse(&hello),
        Ok(Hello::Complete(Some("a.kargo.test".into())))
    );
    let shouting = client_hello("B.Kargo.TEST", true);
    assert_eq!(
        parse(&shouting),
        Ok(Hello::Complete(Some("b.kargo.test".into())))
    );
}

#[test]
fn a_client_hello_without_the_extension_names_nothing() {
    let hello = client_hello("a.kargo.test", false);
    assert_eq!(parse(&hello), Ok(Hello::Complete(None)));
    assert_eq!(parse(&record(&body(None))), Ok(Hello::Complete(None)));
    assert_eq!(parse(&record(&body(Some(&[])))), Ok(Hello::Complete(None)));
}

#[test]
fn every_truncation_asks_for_more_and_never_guesses() {
    let hello = client_hello("a.kargo.test", true);
    for end in 0..hello.len() {
        assert_eq!(
            parse(&hello[..end]),
            Ok(Hello::Incomplete),
            "first {end} bytes"
        );
    }
}

#[test]
fn a_hello_split_over_many_records_is_read_whole() {
    let hello = client_hello("a.kargo.test", true);
    // Two, five and sixteen records (the most a hello may span).
    for size in [2, 5, 16].map(|records| (hello.len() - RECORD_HEADER).div_ceil(records)) {
        let split = refragment(&hello, size);
        assert!(split.len() > hello.len());
        assert_eq!(
            parse(&split),
            Ok(Hello::Complete(Some("a.kargo.test".into())))
        );
        for end in 0..split.len() {
            assert_eq!(
                parse(&split[..end]),
                Ok(Hello::Incomplete),
                "{size}: {end} bytes"
            );
        }
    }
    let Err(HelloError::Malformed(_)) = parse(&refragment(&hello, 1)) else {
        panic!("a hello in one-byte records is refused");
    };
}

#[test]
fn plain_http_and_other_protocols_are_refused_at_the_first_byte() {
    for start in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"G",
        b"SSH-2.0-OpenSSH\r\n",
        b"\x00",
    ] {
        assert!(
            matches!(parse(start), Err(HelloError::Malformed(_))),
            "{start:?}"
        );
    }
    // A TLS alert record, then an SSLv2-style byte pair.
    assert!(parse(&[21, 3, 3, 0, 2, 2, 40]).is_err());
    assert!(parse(&[22, 2, 0]).is_err());
}

#[test]
fn impossible_lengths_are_refused() {
    let too_long = {
        let mut r = record(&body(None));
        let claimed = (MAX_CLIENT_HELLO + 1) as u32;
        r[6..9].copy_from_slice(&claimed.to_be_bytes()[1..]);
        r
    };
    assert_eq!(
        parse(&too_long[..9]),
        Err(HelloError::Malformed(
            "the ClientHello is longer than trafik accepts"
        ))
    );
    assert!(parse(&[22, 3, 1, 0, 0]).is_err(), "an empty record");
    assert!(
        parse(&[22, 3, 1, 0x40, 0x01]).is_err(),
        "a record over 2^14 bytes"
    );
    let not_hello = {
        let mut r = record(&body(None));
        r[5] = 2; // server_hello
        r
    };
    assert!(parse(&not_hello).is_err());
    // The hello says its extensions run past its end.
    let mut short = body(Some(&server_name_extension(b"a.kargo.test")));
    let at = short.len() - 1;
    short.truncate(at);
    assert!(matches!(
        parse(&record(&short)),
        Err(HelloError::Malformed(_))
    ));
    // Bytes after the extensions.
    let mut long = body(Some(&server_name_extension(b"a.kargo.test")));
    long.push(0);
    assert!(parse(&record(&long)).is_err());
}

#[test]
fn names_must_be_dns_names_and_extensions_unique() {
    let named = |name: &[u8]| parse(&record(&body(Some(&server_name_extension(name)))));
    assert_eq!(
        named(b"a.kargo.test."),
        Ok(Hello::Complete(Some("a.kargo.test".into())))
    );
    assert!(named(b"").is_err());
    assert!(named(b"a kargo").is_err());
    assert!(named(b"a\0.kargo.test").is_err());
    assert!(named("ç.test".as_bytes()).is_err());
    let twice = [
        server_name_extension(b"a.test"),
        server_name_extension(b"b.test"),
    ]
    .concat();
    assert_eq!(
        parse(&record(&body(Some(&twice)))),
        Err(HelloError::Malformed("an extension appears twice"))
    );
}

#[test]
fn no_input_makes_the_parser_panic() {
    let hello = client_hello("a.kargo.test", true);
    // Every single byte of a real hello changed to every value.
    for at in 0..hello.len() {
        for value in [0u8, 1, 0x7f, 0xff, hello[at].wrapping_add(1)] {
            let mut changed = hello.clone();
            changed[at] = value;
            let _ = parse(&changed);
        }
    }
    // Seeded random bytes behind a handshake record header.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let length = (state % 300) as usize;
        let mut bytes = vec![22, 3, 1, (length >> 8) as u8, length as u8];
        bytes.extend((0..length).map(|i| (state >> (i % 56)) as u8));
        let _ = parse(&bytes);
    }
}

#[tokio::test]
async fn the_reader_returns_every_byte_it_read() {
    use tokio::io::AsyncWriteExt;
    let hello = client_hello("a.kargo.test", true);
    let (mut client, mut server) = tokio::io::duplex(64);
    let sent = [hello.clone(), b"early".to_vec()].concat();
    let writer = tokio::spawn(async move {
        for chunk in sent.chunks(50) {
            client.write_all(chunk).await.unwrap();
        }
        client
    });
    let (read, name) = read_client_hello(&mut server).await.unwrap();
    assert_eq!(name.as_deref(), Some("a.kargo.test"));
    assert_eq!(&read[..hello.len()], &hello[..]);
    assert!(
        read.len() <= hello.len() + 5,
        "read stops once the hello is whole"
    );
    drop(writer.await.unwrap());

    let (mut client, mut server) = tokio::io::duplex(64);
    client.write_all(&hello[..60]).await.unwrap();
    drop(client);
    assert_eq!(read_client_hello(&mut server).await, Err(HelloError::Ended));
}
